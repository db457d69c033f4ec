/**
 * How deep a parsed JSON value nests. `JSON.parse` reads values nested thousands deep that
 * `JSON.stringify`, schema checks and other recursive readers then fail on with a RangeError, far
 * from where the value came in: a request body or an upstream's message nested deeper than its
 * bound is refused where it is read.
 */

/**
 * Whether `value` has arrays or objects nested more than `limit` deep (a scalar is depth 0, `[]`
 * depth 1). Recursion stops at the limit, so it never goes deeper than `limit` calls itself; every
 * node is visited at most once, nothing is allocated.
 */
export const nestedDeeperThan = (value: unknown, limit: number): boolean => {
  if (typeof value !== "object" || value === null) return false
  if (limit <= 0) return true
  if (Array.isArray(value)) {
    for (const item of value) if (nestedDeeperThan(item, limit - 1)) return true
    return false
  }
  for (const key in value) if (nestedDeeperThan((value as Record<string, unknown>)[key], limit - 1)) return true
  return false
}
