package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pytorch preset on a CPU sets the defaults it decides, with the preset
// as their source; on a GPU only the device-independent ones.
func TestPresetPyTorch(t *testing.T) {
	s := Defaults(WithNumCPU(4))
	cpu, err := s.WithPreset(DeviceCPU)
	require.NoError(t, err)
	assert.Equal(t, "off", cpu.Enum(CudnnAutotune))
	assert.Equal(t, "like-input", cpu.Enum(DropoutMask))
	assert.Equal(t, "onednn", cpu.Enum(ConvLibrary))
	assert.True(t, cpu.Bool(InplaceUpdate))
	assert.Equal(t, "preset pytorch on cpu", cpu.Value(DropoutMask).Source.String())
	// The snapshot it came from is unchanged.
	assert.Equal(t, "limited_workspace", s.Enum(CudnnAutotune))

	gpu, err := cpu.WithPreset(DeviceGPU)
	require.NoError(t, err)
	assert.Equal(t, "limited_workspace", gpu.Enum(CudnnAutotune), "a CPU preset value is reset for a GPU")
	assert.Equal(t, SourceDefault, gpu.Value(CudnnAutotune).Source.Kind)
	assert.Equal(t, "byte", gpu.Enum(DropoutMask))
	assert.Equal(t, "cudnn", gpu.Enum(ConvLibrary))
	assert.True(t, gpu.Bool(InplaceUpdate))
	assert.Equal(t, "preset pytorch on gpu", gpu.Value(InplaceUpdate).Source.String())
}

// The environment and flags win over the preset.
func TestPresetLosesToEnvAndFlags(t *testing.T) {
	s, _, err := Load(MapEnv{"MEGENGINE_INPLACE_UPDATE": "0"}, WithNumCPU(4))
	require.NoError(t, err)
	s, err = s.With("dropout-mask", "byte", FlagSource(""))
	require.NoError(t, err)
	p, err := s.WithPreset(DeviceCPU)
	require.NoError(t, err)
	assert.False(t, p.Bool(InplaceUpdate))
	assert.Equal(t, "env MEGENGINE_INPLACE_UPDATE", p.Value(InplaceUpdate).Source.String())
	assert.Equal(t, "byte", p.Enum(DropoutMask))
	assert.Equal(t, "flag --dropout-mask", p.Value(DropoutMask).Source.String())
	assert.Equal(t, "off", p.Enum(CudnnAutotune))
}

// Each framework gets its own entries; megengine keeps MegEngine's default
// of updates that are not in place.
func TestPresetFrameworks(t *testing.T) {
	for fw, inplace := range map[string]bool{"pytorch": true, "mxnet": true, "megengine": false} {
		s, err := Defaults(WithNumCPU(4)).With("framework", fw, FlagSource(""))
		require.NoError(t, err)
		p, err := s.WithPreset(DeviceGPU)
		require.NoError(t, err)
		assert.Equal(t, inplace, p.Bool(InplaceUpdate), fw)
		p, err = s.WithPreset(DeviceCPU)
		require.NoError(t, err)
		assert.Equal(t, "off", p.Enum(CudnnAutotune), fw)
	}
	_, err := Defaults().WithPreset("tpu")
	assert.ErrorContains(t, err, `device kind "tpu": expected cpu or gpu`)
	_, err = Defaults().With("framework", "jax", FlagSource(""))
	assert.ErrorContains(t, err, "one of pytorch, mxnet, megengine")
	// Every entry names a setting and a value it accepts.
	for _, e := range Presets() {
		i, ok := resolve(e.Setting)
		require.True(t, ok, e.Setting)
		_, err := registry[i].parse(e.Value, 4, Source{Kind: SourcePreset}, "preset")
		assert.NoError(t, err, "%+v", e)
		assert.NotEmpty(t, e.Why)
	}
}
