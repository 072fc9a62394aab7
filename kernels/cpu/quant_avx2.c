/* kernels/cpu/quant_avx2.c — placeholder until implemented. */
