/* runtime/model.c — placeholder until implemented. */
