/* SPDX-License-Identifier: BSD-2-Clause */
/* File extension to Content-Type.
 *
 * The built-in table is sorted by extension (lower case, byte order) and searched by
 * bisection; the unit test checks the order. Textual types that have a charset parameter
 * say UTF-8; JavaScript is text/javascript as RFC 9239 now prescribes. Types whose
 * definition has no charset parameter (application/json, application/yaml, the +xml
 * family, which carry their encoding in the content) go without one. */
#include "umbra/static.h"

#include <string.h>

#define OCTET_STREAM "application/octet-stream"
#define TEXT(t) t "; charset=utf-8"

struct entry {
    const char *ext;
    const char *type;
};

static const struct entry types[] = {
    {"7z", "application/x-7z-compressed"},
    {"aac", "audio/aac"},
    {"apk", "application/vnd.android.package-archive"},
    {"atom", "application/atom+xml"},
    {"avi", "video/x-msvideo"},
    {"avif", "image/avif"},
    {"bin", OCTET_STREAM},
    {"bmp", "image/bmp"},
    {"bz2", "application/x-bzip2"},
    {"css", TEXT("text/css")},
    {"csv", TEXT("text/csv")},
    {"dmg", "application/x-apple-diskimage"},
    {"doc", "application/msword"},
    {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
    {"eot", "application/vnd.ms-fontobject"},
    {"epub", "application/epub+zip"},
    {"exe", "application/vnd.microsoft.portable-executable"},
    {"flac", "audio/flac"},
    {"gif", "image/gif"},
    {"gz", "application/gzip"},
    {"heic", "image/heic"},
    {"htm", TEXT("text/html")},
    {"html", TEXT("text/html")},
    {"ico", "image/x-icon"},
    {"ics", TEXT("text/calendar")},
    {"iso", "application/x-iso9660-image"},
    {"jar", "application/java-archive"},
    {"jpeg", "image/jpeg"},
    {"jpg", "image/jpeg"},
    {"js", TEXT("text/javascript")},
    {"json", "application/json"},
    {"jsonld", "application/ld+json"},
    {"m4a", "audio/mp4"},
    {"m4v", "video/mp4"},
    {"map", "application/json"},
    {"md", TEXT("text/markdown")},
    {"mjs", TEXT("text/javascript")},
    {"mkv", "video/x-matroska"},
    {"mov", "video/quicktime"},
    {"mp3", "audio/mpeg"},
    {"mp4", "video/mp4"},
    {"mpeg", "video/mpeg"},
    {"mpg", "video/mpeg"},
    {"oga", "audio/ogg"},
    {"ogg", "audio/ogg"},
    {"ogv", "video/ogg"},
    {"opus", "audio/ogg"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"ppt", "application/vnd.ms-powerpoint"},
    {"pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
    {"rar", "application/vnd.rar"},
    {"rss", "application/rss+xml"},
    {"rtf", "application/rtf"},
    {"svg", "image/svg+xml"},
    {"swf", "application/x-shockwave-flash"},
    {"tar", "application/x-tar"},
    {"tgz", "application/gzip"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"toml", "application/toml"},
    {"ttf", "font/ttf"},
    {"txt", TEXT("text/plain")},
    {"vtt", TEXT("text/vtt")},
    {"wasm", "application/wasm"},
    {"wav", "audio/wav"},
    {"webm", "video/webm"},
    {"webmanifest", "application/manifest+json"},
    {"webp", "image/webp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"xhtml", "application/xhtml+xml"},
    {"xls", "application/vnd.ms-excel"},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"xml", "application/xml"},
    {"xz", "application/x-xz"},
    {"yaml", "application/yaml"},
    {"yml", "application/yaml"},
    {"zip", "application/zip"},
    {"zst", "application/zstd"},
};

/* Longer than any key in the table; a longer extension is looked up in the overrides only. */
#define EXT_MAX 15

/* The extension of the last path segment: after its last '.', provided that dot is
 * neither the segment's first byte (".bashrc" is a name, not an extension) nor its last. */
static um_str extension(um_str name)
{
    size_t i = name.len;
    while (i > 0 && name.base[i - 1] != '/')
        i--;
    size_t seg = i;
    size_t dot = name.len;
    while (dot > seg && name.base[dot - 1] != '.')
        dot--;
    if (dot <= seg + 1 || dot == name.len) return (um_str){NULL, 0};
    return (um_str){name.base + dot, name.len - dot};
}

const char *um_mime_type(um_str name, const struct um_mime_type *overrides, size_t n)
{
    um_str ext = extension(name);
    if (ext.len == 0) return OCTET_STREAM;

    for (size_t i = 0; i < n; i++)
        if (overrides[i].ext != NULL && um_str_eq_ci(ext, overrides[i].ext))
            return overrides[i].type;

    if (ext.len > EXT_MAX) return OCTET_STREAM;
    char key[EXT_MAX];
    for (size_t i = 0; i < ext.len; i++) {
        char c = ext.base[i];
        key[i] = c >= 'A' && c <= 'Z' ? (char)(c + ('a' - 'A')) : c;
    }

    size_t lo = 0, hi = UM_NELEMS(types);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        /* Compared with lengths: a NUL inside ext must not end the key early. */
        size_t elen = strlen(types[mid].ext);
        int cmp = memcmp(key, types[mid].ext, ext.len < elen ? ext.len : elen);
        if (cmp == 0) cmp = ext.len < elen ? -1 : ext.len > elen;
        if (cmp == 0) return types[mid].type;
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return OCTET_STREAM;
}
