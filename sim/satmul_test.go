package sim

import (
	"math/big"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
)

// satMul against exact big-integer products: equal below 1<<62, 1<<62 at
// and above it or for a negative factor.
func TestSatMul(t *testing.T) {
	const lim = int64(1) << 62
	ref := func(f []int64) int64 {
		p := big.NewInt(1)
		for _, v := range f {
			if v < 0 {
				return lim
			}
			p.Mul(p, big.NewInt(v))
			if p.Cmp(big.NewInt(lim)) > 0 {
				return lim
			}
		}
		return p.Int64()
	}
	rng := rand.New(rand.NewSource(1))
	vals := []int64{0, 1, 2, 3, 7, 1 << 20, 1<<31 - 1, 1 << 31, 1 << 40, lim - 1, lim, lim + 1, 1<<63 - 1, -1, -(1 << 40)}
	for i := 0; i < 20000; i++ {
		f := make([]int64, 1+rng.Intn(6))
		for j := range f {
			if rng.Intn(3) == 0 {
				f[j] = vals[rng.Intn(len(vals))]
			} else {
				f[j] = rng.Int63n(1 << uint(1+rng.Intn(40)))
			}
		}
		assert.Equal(t, ref(f), satMul(f...), "%v", f)
	}
	assert.Equal(t, int64(1), satMul())
	assert.Equal(t, lim, satMul(1<<31, 1<<31))
	assert.Equal(t, int64(1)<<61, satMul(1<<30, 1<<31))
}
