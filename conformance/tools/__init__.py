"""The suite's other tools, not checks: the offline-GPU bundle, golden writers, the soak, the robustness matrix
(the upgrade gate is conformance/gate/, the planted defects conformance/mutations/)."""
