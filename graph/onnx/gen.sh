#!/bin/sh
# Regenerates onnx.pb.go from ONNX's protobuf schema.
#
# Needs protoc (Debian: protobuf-compiler) and protoc-gen-go v1.36.10
# (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.10), and
# onnx.proto (Debian: libonnx-dev installs /usr/include/onnx/onnx.proto; set
# ONNX_INCLUDE to the directory holding onnx/onnx.proto otherwise).
# Run from this directory, or through `go generate ./graph/onnx`.
set -eu
ONNX_INCLUDE=${ONNX_INCLUDE:-/usr/include}
PATH="$PATH:$(go env GOPATH)/bin"
protoc -I"$ONNX_INCLUDE" \
	--go_out=. --go_opt=paths=source_relative \
	--go_opt=Monnx/onnx.proto=github.com/remat-dev/remat/graph/onnx\;onnx \
	onnx/onnx.proto
mv onnx/onnx.pb.go onnx.pb.go
rmdir onnx
