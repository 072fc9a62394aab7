/* kernels/cpu/quant_scalar.c — placeholder until implemented. */
