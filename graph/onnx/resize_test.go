package onnx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/remat-dev/remat/graph"
)

// resizeModel is x [N, 3, 4, 4] * w (a parameter) -> Resize (or opset 9's
// Upsample) with the given constant inputs -> Relu.
func resizeModel(opset int64, op string, ins []string, consts map[string]*TensorProto, attrs ...*AttributeProto) []byte {
	var nodes []*NodeProto
	for name, tp := range consts {
		an, tt := "value", AttributeProto_TENSOR
		nodes = append(nodes, node("Constant", name, nil, []string{name}, &AttributeProto{Name: &an, Type: &tt, T: tp}))
	}
	nodes = append(nodes, node("Mul", "scale", []string{"x", "w"}, []string{"xw"}),
		node(op, "resize", append([]string{"xw"}, ins...), []string{"y"}, attrs...),
		node("Relu", "relu", []string{"y"}, []string{"z"}))
	return model(opset, nodes, []*ValueInfoProto{vi("x", tensorType(TensorProto_FLOAT, "N", 3, 4, 4)),
		vi("w", tensorType(TensorProto_FLOAT, 1, 3, 1, 1))}, "z")
}

func floats(v ...float32) *TensorProto {
	e := int32(TensorProto_FLOAT)
	return &TensorProto{DataType: &e, Dims: []int64{int64(len(v))}, FloatData: v}
}

func ints64(v ...int64) *TensorProto {
	e := int32(TensorProto_INT64)
	return &TensorProto{DataType: &e, Dims: []int64{int64(len(v))}, Int64Data: v}
}

// TestResize: F.interpolate's Resize (and opset 9's Upsample) becomes an
// upsampling op whose shape comes from the constant sizes or scales; its
// gradient reads nothing of the forward (torchvision's segmentation models
// import through it).
func TestResize(t *testing.T) {
	mode := func(m string) *AttributeProto {
		n, tt := "mode", AttributeProto_STRING
		return &AttributeProto{Name: &n, Type: &tt, S: []byte(m)}
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		shape graph.Shape
		mode  string
	}{
		{"scales", resizeModel(13, "Resize", []string{"", "scales"}, map[string]*TensorProto{"scales": floats(1, 1, 2, 2)}), graph.Shape{2, 3, 8, 8}, "nearest"},
		{"sizes, linear", resizeModel(13, "Resize", []string{"", "", "sizes"}, map[string]*TensorProto{"sizes": ints64(2, 3, 6, 5)}, mode("linear")), graph.Shape{2, 3, 6, 5}, "linear"},
		{"opset 9 Upsample", resizeModel(9, "Upsample", []string{"scales"}, map[string]*TensorProto{"scales": floats(1, 1, 1.5, 2)}), graph.Shape{2, 3, 6, 8}, "nearest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Import(bytes.NewReader(tc.data), Options{Batch: 2})
			require.NoError(t, err)
			var up *graph.Op
			for i := range g.Ops {
				if g.Ops[i].Type == graph.OpUpsample {
					up = &g.Ops[i]
				}
			}
			require.NotNil(t, up)
			assert.Equal(t, tc.shape, g.Tensors[up.Outputs[0]].Shape)
			assert.Equal(t, tc.mode, up.Attrs["mode"])
			for i := range g.Ops {
				if g.Ops[i].Forward == up.ID {
					for _, in := range g.Ops[i].Inputs {
						assert.NotEqual(t, up.Inputs[0], in, "the upsampling gradient reads its input")
					}
				}
			}
		})
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"channels", "resizes the batch or channels", resizeModel(13, "Resize", []string{"", "scales"}, map[string]*TensorProto{"scales": floats(1, 2, 2, 2)})},
		{"zero scale", "scales[2] = 0, expected a positive finite number", resizeModel(13, "Resize", []string{"", "scales"}, map[string]*TensorProto{"scales": floats(1, 1, 0, 2)})},
		{"rank", "expected 4 values", resizeModel(13, "Resize", []string{"", "", "sizes"}, map[string]*TensorProto{"sizes": ints64(2, 3, 8)})},
		{"neither", "neither sizes nor scales", resizeModel(13, "Resize", []string{"roi"}, map[string]*TensorProto{"roi": floats()})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(bytes.NewReader(tc.data), Options{Batch: 2})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
