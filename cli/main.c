/*
 * main.c — entry point of the hyperfarm CLI; everything is in cli_*.c so
 * the unit tests can drive it (cli.h).
 */
#include "cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv, stdout, stderr);
}
