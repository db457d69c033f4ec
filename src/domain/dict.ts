/**
 * Records keyed by names that come from outside: service names, agent ids, keys of a JSON document.
 * "constructor", "toString", "valueOf" are valid service names and "__proto__" a valid agent id;
 * on a plain object `counts[name] ??= 0` finds Object.prototype's members, and `byScope[id] = x`
 * with "__proto__" replaces the object's prototype instead of adding a key. A null-prototype object
 * has no inherited members and no `__proto__` setter, so every name is a key like any other.
 */

/** A null-prototype record (see the top of this file). Serializes to JSON like a plain object. */
export type Dict<T> = Record<string, T>

/** A new, empty null-prototype record, or one with `entries`. */
export const dict = <T>(entries?: Iterable<readonly [string, T]>): Dict<T> => {
  const out = Object.create(null) as Dict<T>
  if (entries !== undefined) for (const [key, value] of entries) out[key] = value
  return out
}

// Object.assign sets each key on the target; a null-prototype target has no `__proto__` setter,
// so that key too is copied as an own key.
const copy = <T>(record: Readonly<Record<string, T>>): Dict<T> => Object.assign(Object.create(null) as Dict<T>, record)

/** A null-prototype copy of `record` with `key` set to `value`. */
export const dictWith = <T>(record: Readonly<Record<string, T>>, key: string, value: T): Dict<T> => {
  const out = copy(record)
  out[key] = value
  return out
}

/** A null-prototype copy of `record` without `key`. */
export const dictWithout = <T>(record: Readonly<Record<string, T>>, key: string): Dict<T> => {
  const out = copy(record)
  delete out[key]
  return out
}

/**
 * A deep copy of a JSON value whose objects all have a null prototype: how documents read from a
 * file or a request are kept, so that none of their keys reaches a prototype.
 */
export const nullPrototypeJson = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(nullPrototypeJson)
  if (typeof value !== "object" || value === null) return value
  const out = dict<unknown>()
  for (const [key, v] of Object.entries(value)) out[key] = nullPrototypeJson(v)
  return out
}

/** `JSON.parse` whose objects have a null prototype (see `nullPrototypeJson`). */
export const parseJsonDict = (text: string): unknown =>
  JSON.parse(text, (_key, value: unknown) =>
    typeof value === "object" && value !== null && !Array.isArray(value) && Object.getPrototypeOf(value) !== null
      ? dict(Object.entries(value))
      : value
  )
