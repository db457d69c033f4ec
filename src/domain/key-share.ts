/**
 * What one API key may hold of a capped resource (MCP sessions, listen streams, calls held for
 * their caller's input): a quarter of the cap, at least one, so that one agent's key cannot take it
 * all from the others. Requests without a key (a store with no keys) share the whole cap.
 */
export const keyShare = (cap: number): number => Math.max(1, Math.floor(cap / 4))
