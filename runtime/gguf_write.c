/* runtime/gguf_write.c — placeholder until implemented. */
