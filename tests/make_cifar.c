/*
 * make_cifar - writes a tiny CIFAR-10-format set (data_batch_1.bin ..
 * data_batch_5.bin, test_batch.bin: a label byte, then 1024 red, 1024
 * green and 1024 blue bytes) for tests/test_colour_recipe.sh.
 *
 *   make_cifar DIR free|class
 *
 * 4 classes, 24 training images a batch (120) and 40 test images, each a
 * class's bar (rows 8k .. 8k+5) on a 32x32 background.  free: every image
 * its own random bar and background colours, so colour carries no class;
 * class: class k's background colour is fixed, so the mean colour names
 * it.  A fixed generator: the same files every time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S = 32, PER_BATCH = 24, TEST = 40, K = 4 };

static unsigned long long state = 0x9E3779B97F4A7C15ULL;
static double uniform(void) /* xorshift64*: [0, 1) */
{
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (double)((state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int write_batch(const char *dir, const char *name, int n, int free_colour)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    static unsigned char rec[1 + 3 * S * S];
    for (int i = 0; i < n; i++) {
        int k = (int)(uniform() * K);
        double fg[3], bg[3];
        for (int c = 0; c < 3; c++) {
            fg[c] = uniform();
            bg[c] = free_colour ? uniform() : 0.2 + 0.2 * ((k + c) % K) + 0.02 * uniform();
        }
        rec[0] = (unsigned char)k;
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < S * S; p++) {
                int y = p / S, on = y >= 8 * k && y < 8 * k + 6;
                rec[1 + c * S * S + p] = (unsigned char)(255 * (on ? fg[c] : bg[c]) + 0.5);
            }
        if (fwrite(rec, sizeof rec, 1, f) != 1) {
            perror(path);
            fclose(f);
            return 1;
        }
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "free") != 0 && strcmp(argv[2], "class") != 0)) {
        fprintf(stderr, "usage: make_cifar DIR free|class\n");
        return 2;
    }
    int free_colour = strcmp(argv[2], "free") == 0;
    char name[32];
    for (int b = 1; b <= 5; b++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", b);
        if (write_batch(argv[1], name, PER_BATCH, free_colour))
            return 1;
    }
    return write_batch(argv[1], "test_batch.bin", TEST, free_colour);
}
