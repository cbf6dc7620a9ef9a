// Activation checkpointing (gradient checkpointing): trade compute for memory by not keeping a
// sub-graph's intermediate tensors for the backward pass. checkpoint(fn, inputs) runs fn without
// recording, keeps only its inputs, and records one tape node standing for the whole of fn. When
// the backward pass reaches that node it re-runs fn on a local tape, with each input detached as a
// new leaf, back-propagates the node's output gradients through it and hands the inputs'
// gradients on. Parameters that fn reads are ordinary leaves, so their gradients accumulate as
// usual. The recomputation runs the same kernels in the same order, so gradients are bitwise
// identical to those of the plain recorded forward.
//
// Dropout inside fn is replayed exactly: the active dropout stream's state (core/dropout_rng.h) at
// the first run is saved, and the recomputation draws from a copy of it.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace vkf::autograd {

// Maps the inputs to the outputs; must be a pure function of the inputs, the parameters it reads
// and the dropout stream (it runs twice). Outputs must be new tensors, not the inputs themselves.
using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// Runs fn(inputs). Without an active tape this is just the call. With one, fn runs unrecorded
// and a single node is recorded for it. The node is recorded even when no input requires a
// gradient, since the parameters fn reads may: a recomputation that finds nothing requiring a
// gradient hands nothing back.
std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs);

}  // namespace vkf::autograd
