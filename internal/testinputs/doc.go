// Package testinputs tells go test's result cache about the files a test
// reads through other programs. A test that runs python3 scripts, or builds
// and runs the sim binary, depends on files its own process never opens, so
// `go test` would replay a cached pass after they changed. Track stats every
// Python and Go source of the module from the test's process, which go test
// records as inputs of the test: a changed file then reruns it.
package testinputs
