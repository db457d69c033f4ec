/** The `code` of a Node system error, apart so that the file writers and the file lock share it. */

/** The `code` of a Node system error (`ENOENT`, `EEXIST`...), or undefined. */
export const errnoCode = (e: unknown): string | undefined =>
  typeof e === "object" && e !== null && "code" in e && typeof e.code === "string" ? e.code : undefined
