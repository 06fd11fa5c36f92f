"""`python -m higgs_dummy OUT --size tiny|4b --seed 0 [--flavour ...]`: write a dummy checkpoint."""

from higgs_dummy.checkpoint import main

main()
