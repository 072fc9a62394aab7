/* runtime/gguf.c — placeholder until implemented. */
