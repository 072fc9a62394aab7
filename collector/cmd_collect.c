/* collector/cmd_collect.c — placeholder until implemented. */
