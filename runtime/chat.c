/* runtime/chat.c — placeholder until implemented. */
