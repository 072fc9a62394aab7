/* tests/fuzz/replay_main.c — runs a fuzz target over every file of a seed directory without
 * libFuzzer, so that the seed corpus is exercised in every build (and under the sanitizers). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
        if (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size) {
            fprintf(stderr, "%s: short read\n", path);
            return 1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)size);
        free(buf);
        n++;
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "%s: no seeds\n", argv[1]);
        return 1;
    }
    printf("%d passed, 0 failed\n", n);
    return 0;
}
