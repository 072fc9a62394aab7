/* runtime/threadpool.c — placeholder until implemented. */
