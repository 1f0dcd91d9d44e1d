/* SPDX-License-Identifier: BSD-2-Clause */
/* Lua patterns for the sandbox, with their work counted (pattern.c). Internal to the
 * luavm floor: sandbox.c opens them and charges their steps. */
#ifndef UMBRA_LUAVM_PATTERN_H
#define UMBRA_LUAVM_PATTERN_H

#include <lua.h>

/* Matching steps that cost one instruction of the budget. */
#define UM_LUA_PATTERN_STEPS_PER_INSTRUCTION 8

/* Replaces string.find, string.match, string.gmatch and string.gsub of L (the global
 * string table, which is also what strings index) with the counted ones. */
void um__luapattern_open(lua_State *L);

/* Charges steps matching steps to the budgeted call running on L: past the budget it
 * raises the budget's error (sandbox.c). */
void um__lua_sandbox_charge(lua_State *L, unsigned steps);

#endif
