/* replay_main.c - runs a libFuzzer target's LLVMFuzzerTestOneInput over every
 * file of the directories given on the command line, without libFuzzer: the
 * seed corpus and every input a fuzzer once crashed on (tests/fuzz/regressions)
 * become ordinary C tests, built by any compiler and run plain and under
 * ASan/UBSan by ctest. Exit status: 0 when every input ran (a target returns 0
 * and must not crash), 1 when a directory cannot be read. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf)
        return -1;
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (run_file(path) == 0)
                files++;
        }
        closedir(d);
    }
    printf("replay: %d input(s) ran cleanly\n", files);
    return 0;
}
