/* runtime/tokenizer.c — placeholder until implemented. */
