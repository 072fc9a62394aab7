/* runtime/mkmodel.c — placeholder until implemented. */
