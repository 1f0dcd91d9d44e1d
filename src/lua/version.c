/* SPDX-License-Identifier: BSD-2-Clause */
/* What umbra -v says about LuaJIT. */
#include <luajit.h>

#include "umbra/hooks.h"

const char *um_hooks_library_version(void)
{
    /* LuaJIT has no run-time version call: this is the headers' version, which Debian's
     * package keeps in step with the library. */
    return LUAJIT_VERSION;
}
