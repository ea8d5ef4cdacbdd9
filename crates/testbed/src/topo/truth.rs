//! Per-link ground truth of a topology.
