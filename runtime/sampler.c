/* runtime/sampler.c — placeholder until implemented. */
