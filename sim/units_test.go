package sim

// Sizes the package's tests write their numbers in.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
)
