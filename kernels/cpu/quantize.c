/* kernels/cpu/quantize.c — placeholder until implemented. */
