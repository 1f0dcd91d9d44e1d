/* SPDX-License-Identifier: BSD-2-Clause */
/* Small answers that origins make themselves (see um_sink_answer in origin.h). */
#include <string.h>

#include "umbra/origin.h"

void um_sink_answer(struct um_sink *s, struct um_response_head *h, const char *body)
{
    size_t len = body ? strlen(body) : 0;
    h->content_length = (int64_t)len;
    s->ops->on_head(s, h);
    /* A client takes it whole (it comes right after its head); a layer that refuses it is
     * discarding this answer (the cache serving a stale copy instead): either way, the end
     * follows, since nothing resumes an answer that is not a fetch. */
    if (len)
        s->ops->on_data(s, body, len);
    s->ops->on_end(s, UM_OK);
}

void um_sink_answer_text(struct um_sink *s, int status, const char *body)
{
    static const struct um_header ct = {UM_STR("Content-Type"),
                                        UM_STR("text/plain; charset=utf-8")};
    struct um_response_head h = {.status = status, .headers = &ct, .num_headers = 1};
    um_sink_answer(s, &h, body);
}
