/**
 * "Did you mean": the names closest to a name that was not found (a tool's callable name, a
 * service's name), by Damerau-Levenshtein distance (optimal string alignment: a swap of two
 * neighbouring letters counts once). Bounded whatever the caller or an upstream sends: the name
 * looked for and each candidate are cut to `MAX_NAME` characters, at most `MAX_CANDIDATES` names
 * are compared, a candidate whose length alone puts it out of reach is skipped, and a comparison
 * stops as soon as a row of the table exceeds the distance. The caller passes only names the
 * asker may see (its own scope's): a suggestion must never reveal another agent's services.
 * No I/O.
 */

/** Farthest a suggestion may be from the name looked for. */
export const MAX_DISTANCE = 2
/** Most suggestions given. */
export const MAX_SUGGESTIONS = 3
/** Most candidate names compared (the rest are not looked at). */
export const MAX_CANDIDATES = 1_000
/** Longest name compared; longer names (looked for or candidates) are not suggested or compared. */
export const MAX_NAME = 128

/**
 * The optimal-string-alignment distance of `a` and `b`, or `limit + 1` as soon as it is known to
 * exceed `limit` (the rows are O(length) and the work O(length x length) at most, for names of at
 * most `MAX_NAME` characters).
 */
export const distance = (a: string, b: string, limit: number = MAX_DISTANCE): number => {
  if (Math.abs(a.length - b.length) > limit) return limit + 1
  if (a === b) return 0
  // Three rows of the table: two rows back (for a swap), the previous row, the current one.
  let before = new Int32Array(b.length + 1)
  let previous = new Int32Array(b.length + 1)
  let current = new Int32Array(b.length + 1)
  for (let j = 0; j <= b.length; j++) previous[j] = j
  for (let i = 1; i <= a.length; i++) {
    current[0] = i
    let rowMin = i
    const ai = a.charCodeAt(i - 1)
    for (let j = 1; j <= b.length; j++) {
      const bj = b.charCodeAt(j - 1)
      let d = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (ai === bj ? 0 : 1))
      if (i > 1 && j > 1 && ai === b.charCodeAt(j - 2) && a.charCodeAt(i - 2) === bj) d = Math.min(d, before[j - 2]! + 1)
      current[j] = d
      if (d < rowMin) rowMin = d
    }
    if (rowMin > limit) return limit + 1
    const spare = before
    before = previous
    previous = current
    current = spare
  }
  return previous[b.length]!
}

/**
 * The names among `candidates` closest to `name` (case-insensitive), within `MAX_DISTANCE`, nearest
 * first (then alphabetical), at most `MAX_SUGGESTIONS`; `name` itself is never suggested.
 */
export const suggestions = (name: string, candidates: Iterable<string>): Array<string> => {
  if (name.length === 0 || name.length > MAX_NAME) return []
  const wanted = name.toLowerCase()
  const found: Array<{ readonly name: string; readonly d: number }> = []
  let compared = 0
  for (const candidate of candidates) {
    if (compared++ >= MAX_CANDIDATES) break
    if (candidate.length > MAX_NAME || candidate === name) continue
    const d = distance(wanted, candidate.toLowerCase())
    if (d <= MAX_DISTANCE) found.push({ name: candidate, d })
  }
  return found
    .sort((x, y) => x.d - y.d || (x.name < y.name ? -1 : x.name > y.name ? 1 : 0))
    .slice(0, MAX_SUGGESTIONS)
    .map((s) => s.name)
}

/** "; did you mean 'a' or 'b'?" to end a message with, or "" without suggestions. */
export const didYouMean = (names: ReadonlyArray<string>): string =>
  names.length === 0 ? "" : `; did you mean ${names.map((n) => `'${n}'`).join(" or ")}?`
