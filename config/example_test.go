package config_test

import (
	"fmt"
	"io"

	"github.com/remat-dev/remat/config"
)

// Load settings from an environment, override one by a CLI flag, then list
// where each effective value came from, as `sim env` does.
func Example() {
	env := config.MapEnv{
		"MXNET_BACKWARD_DO_MIRROR":         "1",
		"MEGENGINE_DTR_EVICTION_THRESHOLD": "5GB",
		"MEGENGINE_ENABLE_DROP":            "on",
		"MXNET_BACKWARD_DO_MIROR":          "1", // misspelled
	}
	s, warnings, err := config.Load(env, config.WithNumCPU(8))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	s, err = s.With("--dtr-threshold", "2.5GiB", config.FlagSource(""))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("mirror:", s.Bool(config.BackwardDoMirror), "threshold bytes:", s.Size(config.DTREvictionThreshold))

	// Per-op attribute beats every global source.
	v, _ := s.ForOp("mirror.enabled", map[string]string{"force_mirroring": "0"})
	fmt.Println("op with force_mirroring=0:", v.Bool(), "from", v.Source)

	// Rows feed config.WriteTable / config.WriteJSON; here the non-defaults.
	for _, r := range s.Rows(map[string]int{"force_mirroring": 2}) {
		if r.Source != "default" {
			fmt.Printf("%s=%s (%s, %s)\n", r.Env, r.Value, r.Source, r.Mode())
		}
	}
	_ = config.WriteJSON(io.Discard, s.Rows(nil))
	// Output:
	// warning: MXNET_BACKWARD_DO_MIROR is not a setting remat reads and is ignored; did you mean MXNET_BACKWARD_DO_MIRROR?
	// mirror: true threshold bytes: 2684354560
	// op with force_mirroring=0: false from attribute force_mirroring
	// MEGENGINE_ENABLE_DROP=true (env MEGENGINE_ENABLE_DROP, read-once)
	// MEGENGINE_DTR_EVICTION_THRESHOLD=2560MiB (flag --dtr-threshold, read-once)
	// MXNET_BACKWARD_DO_MIRROR=true (env MXNET_BACKWARD_DO_MIRROR; attribute force_mirroring on 2 ops, dynamic)
}
