// The pass's tables: threads (dense indexes, by serial), their Ractors (the holders of each
// Ractor's GVL and its waiting count), and the pairs that blame, code locations and release
// sites sum into (one entry per key, in order of first use).
#include "pass_shared.h"

static uint32_t ractor_index(eng_engine *engine, uint32_t id) {
    uint32_t at = map_get(&engine->ractor_of, id);
    if (at != UINT32_MAX) return at;
    at = (uint32_t)engine->ractors.size;
    eng_ractor *ractor = vec_push(&engine->memory, &engine->ractors);
    ractor->id = id;
    ractor->prune_at = 4096;
    vec_init(&ractor->holds, sizeof(eng_hold));
    vec_init(&ractor->hold_sums, sizeof(eng_hold_sum));
    vec_init(&ractor->holders, sizeof(uint32_t));
    vec_init(&ractor->members, sizeof(uint32_t));
    map_put(&engine->memory, &engine->ractor_of, id, at);
    return at;
}

uint32_t thread_index(eng_engine *engine, uint32_t serial) {
    uint32_t at = map_get(&engine->thread_of, serial);
    if (at != UINT32_MAX) return at;
    uint32_t ractor_id = map_get(&engine->ractor_id_of, serial);
    uint32_t ractor = ractor_index(engine, ractor_id == UINT32_MAX ? 0 : ractor_id);
    at = (uint32_t)engine->threads.size;
    eng_thread *thread = vec_push(&engine->memory, &engine->threads);
    thread->serial = serial;
    thread->ractor = ractor;
    thread->order = -1;
    thread->cursor_order = -1;
    thread->run_ref = RUN_REF_NONE;
    map_put(&engine->memory, &engine->thread_of, serial, at);
    if (serial < SMALL_SERIALS) engine->small_serials[serial] = at;
    *(uint32_t *)vec_push(&engine->memory, &RACTOR(engine, ractor)->members) = at;
    return at;
}

void register_thread(eng_engine *engine, uint32_t at) {
    eng_thread *thread = THREAD(engine, at);
    if (thread->order >= 0) return;
    thread->order = (int32_t)engine->order.size;
    *(uint32_t *)vec_push(&engine->memory, &engine->order) = at;
}

eng_pair *pair(eng_engine *engine, eng_vec *pairs, eng_map *map, uint64_t key, uint32_t a, uint32_t b) {
    uint32_t at = map_get(map, key);
    if (at == UINT32_MAX) {
        at = (uint32_t)pairs->size;
        eng_pair *created = vec_push(&engine->memory, pairs);
        created->a = a;
        created->b = b;
        map_put(&engine->memory, map, key, at);
    }
    return &VEC_AT(*pairs, eng_pair, at);
}

void set_state(eng_engine *engine, uint32_t at, uint8_t state) {
    eng_thread *thread = THREAD(engine, at);
    bool was_holding = thread->state == ST_RUN || thread->state == ST_GC;
    bool holding = state == ST_RUN || state == ST_GC;
    thread->state = state;
    if (was_holding == holding) return;
    eng_vec *holders = &RACTOR(engine, thread->ractor)->holders;
    if (holding) {
        *(uint32_t *)vec_push(&engine->memory, holders) = at;
        return;
    }
    for (size_t i = 0; i < holders->size; i++) {
        if (VEC_AT(*holders, uint32_t, i) == at) {
            VEC_AT(*holders, uint32_t, i) = VEC_AT(*holders, uint32_t, holders->size - 1);
            holders->size--;
            return;
        }
    }
}

void add_waiting(eng_engine *engine, uint32_t ractor, int64_t delta) {
    RACTOR(engine, ractor)->waiting += delta;
    engine->waiting_total += delta;
}
