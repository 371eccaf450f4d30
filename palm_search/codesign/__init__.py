"""Hardware and mapping co-design (PHAZE, Wang et al. ICML'24): search the chip with its mappings."""
