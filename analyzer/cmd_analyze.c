/* analyzer/cmd_analyze.c — placeholder until implemented. */
