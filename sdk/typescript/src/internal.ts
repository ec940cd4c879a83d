// Switches for the torture harness's mutants. Not part of the API.
export const internal = {
  /** Arms the local deadline from the answer instead of the send: a known bug, for the torture worker's mutant. */
  deadlineFromAnswer: false,
};
