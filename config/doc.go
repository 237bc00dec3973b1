// Package config is remat's settings layer: one registry of every setting
// (name, environment variable, type, default, accepted values, read-once or
// dynamic, CLI flag, per-op attribute), loading with precedence
// default < environment < Go option or CLI flag < per-op attribute, and the
// provenance of every effective value, rendered by `sim env`.
//
// The package imports nothing of the project; strategies read settings
// through typed keys such as BackwardDoMirror:
//
//	s, warnings, err := config.Load(config.OSEnv())
//	s, err = s.With("--mirror", "true", config.FlagSource("mirror"))
//	mirror := s.Bool(config.BackwardDoMirror)
//
// Settings snapshots are immutable. Global returns the process-wide snapshot,
// where read-once settings are captured at the first call.
package config
