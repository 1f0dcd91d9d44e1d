/* SPDX-License-Identifier: BSD-2-Clause */
/* What umbra -v says about OpenSSL. */
#include <openssl/crypto.h>

#include "umbra/tls.h"

const char *um_tls_library_version(void)
{
    /* The library that is loaded, which may be newer than the headers built against. */
    return OpenSSL_version(OPENSSL_VERSION);
}
