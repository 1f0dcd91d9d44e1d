/* SPDX-License-Identifier: BSD-2-Clause */
/* What umbra -v says about libcurl. */
#include <curl/curl.h>

#include "umbra/upstream.h"

const char *um_upstream_library_version(void)
{
    /* "libcurl/X OpenSSL/Y zlib/Z ... nghttp2/N": the loaded library and what it uses. */
    return curl_version();
}
