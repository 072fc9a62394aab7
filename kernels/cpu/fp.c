/* kernels/cpu/fp.c — placeholder until implemented. */
