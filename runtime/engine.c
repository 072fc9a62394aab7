/* runtime/engine.c — the engine entry (engine.h): the model, its route replay, the executor plan,
 * then the session. */
#include "runtime/engine.h"

#include <inttypes.h>
#include <stdio.h>

#include "runtime/moe.h"
#include "runtime/state.h"

mp_status mp_engine_load(mp_engine *e, const char *model_path, mp_error *err)
{
    return mp_model_load(model_path, &e->model, err);
}

mp_status mp_engine_plan(mp_engine *e, const mp_placement_opts *o, const char *replay_path,
                         const mp_route_replay_api *replay, mp_error *err)
{
    const mp_model *m = e->model;
    if (replay_path) {
        if (!replay)
            return mp_fail(err, MP_ERR_UNSUPPORTED, "--route-replay is not available here (the moeplan binary "
                           "provides it)");
        mp_status st = replay->open(replay_path, m->hp.n_layer, m->hp.n_expert, m->hp.n_expert_used,
                                    &e->replay_state, &e->route_src, err);
        if (st)
            return st;
        e->replay = replay;
        e->params.route_src = &e->route_src;
    }
    return mp_executor_plan(m, o->executor, o, &e->params, &e->placement, &e->gpu, err);
}

mp_status mp_engine_start(mp_engine *e, mp_error *err)
{
    e->params.placement = e->gpu ? &e->placement : NULL;
    return mp_session_new(e->model, &e->params, &e->session, err);
}

void mp_engine_step_error(const mp_engine *e, mp_error *err)
{
    if (e->replay_state && e->replay->error(e->replay_state)->code)
        *err = *e->replay->error(e->replay_state);
}

void mp_engine_profile_line(const mp_engine *e, char *buf, size_t cap)
{
    mp_moe_cpu_profile p;
    buf[0] = 0;
    if (!e->session || !e->session->moe || !mp_moe_scratch_profile_get(e->session->moe, &p))
        return;
    char line[400];
    mp_moe_cpu_profile_format(&p, line, sizeof line);
    snprintf(buf, cap, "CPU experts (MP_MOE_CPU_PROFILE), %" PRId64 " calls: %s", p.calls, line);
}

void mp_engine_close(mp_engine *e)
{
    mp_session_free(e->session); /* before the replay: the session holds its route source */
    if (e->replay_state)
        e->replay->close(e->replay_state);
    mp_placement_free(&e->placement);
    mp_model_free(e->model);
    *e = (mp_engine){0};
}
