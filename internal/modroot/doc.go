// Package modroot finds the root of the module a program runs in: the
// nearest directory at or above the working directory that holds a go.mod.
// The misuse-table generator and the tests that track their inputs
// (internal/testinputs) both walk the tree from there.
package modroot
