/* umbra-settings: prints every setting the configuration loader knows, one per line
 * (um_config_settings), for tests/integration/test_docs.py. */
#include <stdio.h>

#include "umbra/config.h"
#include "umbra/module.h"

static void print(const char *setting, void *arg)
{
    (void)arg;
    printf("%s\n", setting);
}

int main(void)
{
    um_modules_init(); /* the modules' settings are theirs to list */
    um_config_settings(print, NULL);
    return 0;
}
