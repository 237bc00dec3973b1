// Package models builds the training graphs of well-known networks (ResNets,
// VGG, DenseNet, MobileNetV2, U-Net, GPT-2, an unrolled LSTM, an MLP) and
// Checkmate's linear chain benchmark, with parameter names, shapes and
// activation sizes as their PyTorch reference implementations have them.
//
// Build returns the full training graph (forward, backward, optimizer
// update); BuildForward returns the forward graph and its loss. See
// docs/models.md for every model's options, defaults and parameter count.
package models
