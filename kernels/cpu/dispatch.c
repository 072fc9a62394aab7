/* kernels/cpu/dispatch.c — placeholder until implemented. */
