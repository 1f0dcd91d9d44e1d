/* The free lists of equal-sized blocks (src/core/bufpool.c): a block given back is the
 * next one taken (a pointer move), the reserve is bounded, and a resize drops what is
 * kept. Run under ASan, a block freed twice or leaked fails the build's sanitizer job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "umbra/buf.h"
#include "umbra/bufpool.h"

static void test_get_put_reuses(void **state)
{
    (void)state;
    struct um_bufpool p;
    um_bufpool_init(&p, 4096, 4);
    char *a = um_bufpool_get(&p);
    memset(a, 'a', 4096); /* the whole block is the taker's */
    assert_int_equal(p.out, 1);
    um_bufpool_put(&p, a);
    assert_int_equal(p.out, 0);
    assert_int_equal(p.num, 1);
    /* The block given back is the one taken next: no allocation. */
    char *b = um_bufpool_get(&p);
    assert_ptr_equal(a, b);
    assert_int_equal(p.num, 0);
    char *c = um_bufpool_get(&p);
    assert_ptr_not_equal(b, c);
    um_bufpool_put(&p, c);
    um_bufpool_put(&p, b);
    assert_ptr_equal(um_bufpool_get(&p), b); /* last in, first out */
    um_bufpool_put(&p, b);
    um_bufpool_put(&p, NULL); /* nothing */
    assert_int_equal(p.num, 2);
    assert_int_equal(p.out, 0);
    um_bufpool_dispose(&p);
    assert_int_equal(p.num, 0);
}

static void test_keeps_at_most_keep(void **state)
{
    (void)state;
    struct um_bufpool p;
    um_bufpool_init(&p, 64, 3);
    void *blk[10];
    for (int i = 0; i < 10; i++)
        blk[i] = um_bufpool_get(&p);
    assert_int_equal(p.out, 10);
    for (int i = 0; i < 10; i++)
        um_bufpool_put(&p, blk[i]);
    /* Three kept, seven back to the system (ASan would see them leak otherwise). */
    assert_int_equal(p.num, 3);
    assert_int_equal(p.out, 0);
    um_bufpool_dispose(&p);
}

static void test_tiny_blocks_hold_the_link(void **state)
{
    (void)state;
    struct um_bufpool p;
    um_bufpool_init(&p, 1, 2);
    assert_true(p.size >= sizeof(void *));
    void *a = um_bufpool_get(&p), *b = um_bufpool_get(&p);
    um_bufpool_put(&p, a);
    um_bufpool_put(&p, b);
    assert_ptr_equal(um_bufpool_get(&p), b);
    assert_ptr_equal(um_bufpool_get(&p), a);
    um_bufpool_put(&p, a);
    um_bufpool_put(&p, b);
    um_bufpool_dispose(&p);
}

static void test_resize_drops_kept(void **state)
{
    (void)state;
    struct um_bufpool p;
    um_bufpool_init(&p, 100, 8);
    void *old = um_bufpool_get(&p);
    um_bufpool_put(&p, um_bufpool_get(&p));
    assert_int_equal(p.num, 1);
    um_bufpool_resize(&p, 200);
    assert_int_equal(p.size, 200);
    assert_int_equal(p.num, 0);
    free(old); /* a block of the old size is freed, not given back */
    char *n = um_bufpool_get(&p);
    memset(n, 0, 200);
    um_bufpool_put(&p, n);
    um_bufpool_dispose(&p);
}

static void test_buf_adopts_a_block(void **state)
{
    (void)state;
    struct um_bufpool p;
    um_bufpool_init(&p, 64, 2);
    struct um_buf b;
    um_buf_init(&b);
    char *blk = um_bufpool_get(&p);
    um_buf_adopt(&b, blk, 64);
    um_buf_append_str(&b, "hello");
    assert_ptr_equal(b.base, blk); /* fits: no allocation */
    assert_string_equal(b.base, "hello");
    assert_int_equal(b.cap, 64);
    /* Back to the pool while it is still the pool's size. */
    assert_ptr_equal(um_buf_detach(&b), blk);
    um_bufpool_put(&p, blk);
    /* A buffer that grew past the block is the system's: freed by um_buf_dispose. */
    um_buf_adopt(&b, um_bufpool_get(&p), 64);
    for (int i = 0; i < 20; i++)
        um_buf_append_str(&b, "0123456789");
    assert_int_equal(b.len, 200);
    assert_true(b.cap > 64);
    um_bufpool_forget(&p); /* the grown block left the pool for good */
    assert_int_equal(p.out, 0);
    um_buf_dispose(&b);
    um_bufpool_dispose(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_put_reuses),
        cmocka_unit_test(test_keeps_at_most_keep),
        cmocka_unit_test(test_tiny_blocks_hold_the_link),
        cmocka_unit_test(test_resize_drops_kept),
        cmocka_unit_test(test_buf_adopts_a_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
