/* runtime/moe_cpu.c — placeholder until implemented. */
