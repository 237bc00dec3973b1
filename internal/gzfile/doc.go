// Package gzfile opens input files that may be gzip-compressed: a graph
// file or a DTR log of a million ops is hundreds of megabytes as text and
// under a tenth of that compressed (docs/cli.md, "Inputs"). A file is taken
// as gzip by its first two bytes (RFC 1952's magic), not by its name. A file
// is read until a context is done, so that a parser of a big file stops at
// its next read when the run is interrupted.
package gzfile
