/* simulator/cmd_simulate.c — placeholder until implemented. */
