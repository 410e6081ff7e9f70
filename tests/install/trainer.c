/* A trainer built only from the installed header and pkg-config flags:
 * pushes +1 three times to 100 sparse keys and checks the pulled sums.
 * Usage: trainer SERVERS */
#include <stdio.h>
#include <psclient.h>

int main(int argc, char **argv)
{
    ps_client *c;
    if (argc != 2 || ps_open(&c, argv[1], NULL) != PS_OK)
        return 2;
    int t = ps_table(c, "w", NULL);
    uint64_t keys[100];
    float one[100], out[100];
    for (int i = 0; i < 100; i++) {
        keys[i] = (uint64_t)i * 1000003u;
        one[i] = 1.0f;
    }
    for (int r = 0; r < 3; r++)
        ps_push(c, t, keys, 100, one, NULL, NULL);
    int rc = ps_wait_all(c);
    if (rc == PS_OK)
        rc = ps_wait(c, ps_pull(c, t, keys, 100, out, NULL, NULL));
    for (int i = 0; rc == PS_OK && i < 100; i++)
        if (out[i] != 3.0f) {
            fprintf(stderr, "key %d: got %g, want 3\n", i, (double)out[i]);
            rc = -100;
        }
    if (rc != PS_OK && rc != -100)
        fprintf(stderr, "%s: %s\n", ps_strerror(rc), ps_last_error(c));
    ps_close(c);
    return rc == PS_OK ? 0 : 1;
}
