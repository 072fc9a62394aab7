/* runtime/vocab_build.c — placeholder until implemented. */
