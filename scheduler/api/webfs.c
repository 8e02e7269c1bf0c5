/*
 * webfs.c — static file path checks (see webfs.h).
 */
#include "scheduler/api/webfs.h"

#include "hf_err.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The checks both sources share: RET 0 or HF_EINVAL. */
static int check_url(const char *url)
{
    size_t n = strlen(url);
    if (n == 0 || url[0] != '/' || n > WEBFS_PATH_MAX) return HF_EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c < 0x20 || c == 0x7f || c == '\\' || c == '%') return HF_EINVAL;
    }
    /* Segment checks: no "." or ".." anywhere. */
    const char *p = url;
    while (*p) {
        while (*p == '/') p++;
        const char *e = p;
        while (*e && *e != '/') e++;
        size_t sl = (size_t)(e - p);
        if ((sl == 1 && p[0] == '.') || (sl == 2 && p[0] == '.' && p[1] == '.')) return HF_EINVAL;
        p = e;
    }
    return 0;
}

int webfs_embedded(const char *url, const webfs_asset **out)
{
    if (check_url(url)) return HF_EINVAL;
    char want[WEBFS_PATH_MAX + 16];
    size_t n = strlen(url);
    snprintf(want, sizeof want, "%s%s", url, url[n - 1] == '/' ? "index.html" : "");
    for (int pass = 0; pass < 2; pass++) {
        for (const webfs_asset *a = webfs_assets; a->path; a++)
            if (strcmp(a->path, want) == 0) { *out = a; return 0; }
        /* "/dir" without the slash: its index, as webfs_resolve does. */
        if (url[n - 1] == '/') break;
        snprintf(want, sizeof want, "%s/index.html", url);
    }
    return HF_ENOTFOUND;
}

int webfs_resolve(const char *root_real, const char *url, char *out, size_t outlen)
{
    char rel[WEBFS_PATH_MAX + 16];
    if (check_url(url)) return HF_EINVAL;
    size_t n = strlen(url);
    snprintf(rel, sizeof rel, "%s%s", url, url[n - 1] == '/' ? "index.html" : "");
    char joined[PATH_MAX + WEBFS_PATH_MAX + 32];
    snprintf(joined, sizeof joined, "%s%s", root_real, rel);
    char real[PATH_MAX];
    if (!realpath(joined, real)) return HF_ENOTFOUND;
    size_t rl = strlen(root_real);
    if (strncmp(real, root_real, rl) != 0 || (real[rl] != '/' && !(rl == 1 && root_real[0] == '/')))
        return HF_ENOTFOUND;   /* a symlink out of the root */
    struct stat sb;
    if (stat(real, &sb) != 0) return HF_ENOTFOUND;
    if (S_ISDIR(sb.st_mode)) {
        /* "/dir" without the slash: serve its index. */
        char idx[PATH_MAX + 16];
        snprintf(idx, sizeof idx, "%s/index.html", real);
        if (!realpath(idx, real) || strncmp(real, root_real, rl) != 0 || real[rl] != '/' || stat(real, &sb) != 0)
            return HF_ENOTFOUND;
    }
    if (!S_ISREG(sb.st_mode)) return HF_ENOTFOUND;
    if (strlen(real) >= outlen) return HF_ENOTFOUND;
    memcpy(out, real, strlen(real) + 1);
    return 0;
}

const char *webfs_mime(const char *path)
{
    static const struct { const char *ext, *type; } m[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
        {".json", "application/json"}, {".svg", "image/svg+xml"}, {".png", "image/png"},
        {".ico", "image/x-icon"}, {".map", "application/json"}, {".txt", "text/plain; charset=utf-8"},
        {".woff2", "font/woff2"}, {".wasm", "application/wasm"},
    };
    const char *dot = strrchr(path, '.');
    if (dot)
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
            if (strcmp(dot, m[i].ext) == 0) return m[i].type;
    return "application/octet-stream";
}
