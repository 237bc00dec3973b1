package sim

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanJSONRoundTrip(t *testing.T) {
	g := chain(t)
	p := DefaultPlan(g)
	p.Steps = append(p.Steps, SwapOutStep(tW2), SwapInStep(tW2))
	var buf bytes.Buffer
	require.NoError(t, EncodePlan(&buf, p))
	golden(t, "plan_chain.golden.json", buf.Bytes())
	back, err := DecodePlan(&buf)
	require.NoError(t, err)
	assert.Equal(t, p, back)
	require.NoError(t, CheckPlan(g, back))
}

func TestDecodePlanErrors(t *testing.T) {
	cases := map[string]string{
		`{"version":1,"steps":[]}`:                                             "field format is missing",
		`{"format":"x","version":1,"steps":[]}`:                                `field format is "x"`,
		`{"format":"remat.plan","version":2,"steps":[]}`:                       "field version is 2, expected 1",
		`{"format":"remat.plan","steps":[]}`:                                   "field version is missing",
		`{"format":"remat.plan","version":1,"steps":[{}]}`:                     "steps[0]: has 0 step kinds",
		`{"format":"remat.plan","version":1,"steps":[{"compute":1,"free":2}]}`: "steps[0]: has 2 step kinds",
		`{"format":"remat.plan","version":1,"steps":[{"free":-1}]}`:            "steps[0].free: ID -1",
		`{"format":"remat.plan","version":1,"steps":[{"swap_in":4294967296}]}`: "steps[0].swap_in: ID 4294967296",
		`{"format":"remat.plan","version":1,"steps":[{"recompute":1}]}`:        "unknown field",
		`{"format":"remat.plan","version":1,"steps":[]} {}`:                    "trailing data",
		`[`: "decode plan",
	}
	for in, want := range cases {
		_, err := DecodePlan(strings.NewReader(in))
		assert.ErrorContains(t, err, want, in)
	}
}

func TestCheckPlan(t *testing.T) {
	g := chain(t)
	assert.ErrorContains(t, CheckPlan(g, plan(ComputeStep(7))), "plan step 0: compute op 7, expected 0..6")
	assert.ErrorContains(t, CheckPlan(g, plan(ComputeStep(0), FreeStep(9))), "plan step 1: free tensor 9, expected 0..8")
	assert.ErrorIs(t, CheckPlan(g, plan(Step{Kind: 0})), ErrInvalidPlan)
	assert.Error(t, EncodePlan(&bytes.Buffer{}, plan(Step{Kind: 0})))
}

func FuzzDecodePlan(f *testing.F) {
	var buf bytes.Buffer
	p := &Plan{Strategy: "fuzz \"seed\"", Steps: []Step{ComputeStep(0), FreeStep(1), SwapOutStep(2), SwapInStep(2)}}
	if err := EncodePlan(&buf, p); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"remat.plan","version":1,"strategy":"none","steps":[]}`))
	f.Add([]byte(`{"format":"remat.plan","version":1,"steps":[{"compute":2147483647}]}`))
	f.Add([]byte(`{"format":"remat.plan","version":1,"steps":[null]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePlan(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := EncodePlan(&out, p); err != nil {
			t.Fatalf("decoded plan does not encode: %v", err)
		}
		back, err := DecodePlan(&out)
		if err != nil {
			t.Fatalf("re-decoding %q: %v", out.String(), err)
		}
		if len(back.Steps) != len(p.Steps) || back.Strategy != p.Strategy {
			t.Fatalf("round trip changed the plan")
		}
		for i := range p.Steps {
			if back.Steps[i] != p.Steps[i] {
				t.Fatalf("step %d: %v != %v", i, back.Steps[i], p.Steps[i])
			}
		}
	})
}

func TestPlanJSONSignature(t *testing.T) {
	g := chain(t)
	p := DefaultPlan(g)
	p.Signature = []string{"forward linear 2:?[?]", "forward relu 3:?[?]", "forward loss 4:?[?]",
		"backward loss_grad <2 5:?[?]", "backward relu_grad <1 6:?[?]", "backward linear_grad 7:?[?]", "update sgd 8:?[?]"}
	var buf bytes.Buffer
	require.NoError(t, EncodePlan(&buf, p))
	assert.Contains(t, buf.String(), "], \"signature\": [\n\"forward linear 2:?[?]\",\n")
	assert.Contains(t, buf.String(), "\"backward loss_grad <2 5:?[?]\"") // "<" is not escaped
	back, err := DecodePlan(&buf)
	require.NoError(t, err)
	assert.Equal(t, p, back)
	require.NoError(t, CheckPlan(g, back))

	// Without a signature the field is absent and decodes as nil.
	p.Signature = nil
	buf.Reset()
	require.NoError(t, EncodePlan(&buf, p))
	assert.NotContains(t, buf.String(), "signature")
	back, err = DecodePlan(&buf)
	require.NoError(t, err)
	assert.Nil(t, back.Signature)
}

func TestCheckPlanSignature(t *testing.T) {
	g := chain(t)
	p := DefaultPlan(g)
	p.Signature = []string{"forward linear", "forward relu"}
	err := CheckPlan(g, p)
	assert.ErrorIs(t, err, ErrInvalidPlan)
	assert.ErrorContains(t, err, "plan signature: 2 entries, expected one per op of graph \"chain\" (7)")
	p.Signature = []string{"forward linear", "forward relu", "forward loss", "backward loss_grad", "backward relu", "backward linear_grad", "update sgd"}
	err = CheckPlan(g, p)
	assert.ErrorIs(t, err, ErrInvalidPlan)
	assert.ErrorContains(t, err, `plan signature[4]: "backward relu", expected op #4 "bwd_b" to start with "backward relu_grad"`)
	p.Signature[4] = "backward relu_grad <1"
	assert.NoError(t, CheckPlan(g, p))
	_, err = DecodePlan(strings.NewReader(`{"format":"remat.plan","version":1,"steps":[],"signature":[1]}`))
	assert.ErrorContains(t, err, "decode plan")
}
