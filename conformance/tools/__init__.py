"""The suite's tools, not checks: the upgrade gate, planted-defect runs, golden writers, the soak, the robustness matrix."""
