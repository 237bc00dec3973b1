// Package mirror implements MXNet's backward mirroring (MXNET_BACKWARD_DO_MIRROR):
// forward ops whose outputs are cheap to recompute are "mirrored": their
// outputs die after the forward pass and are recomputed during backward from
// the nearest kept ancestor. Classic follows MXNet 1.x exactly; CostAware
// follows the idea of MXNet PR #18228 and goes further by letting the
// simulator judge, so that it never returns a plan with a higher peak than no
// mirroring at all.
package mirror
