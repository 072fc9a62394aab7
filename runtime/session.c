/* runtime/session.c — placeholder until implemented. */
