/*
 * The colour theme, applied as early as the page allows (the first module in <head>: the
 * pages run no classic scripts, tests/browser/test_xss.py holds them to that). The rule it keeps: the theme is the user's choice if they made
 * one on this device (localStorage `holdback-theme`: `light` or `dark`), and the system's
 * otherwise; the choice holds no data of the user's, only that word. style.css reads it from
 * `data-theme` on <html>; the toggle and the settings dialog (settings.js) change it.
 */
(function applyTheme() {
  let choice = null;
  try {
    choice = window.localStorage.getItem('holdback-theme');
  } catch (e) {
    choice = null; // storage refused (private mode): follow the system
  }
  if (choice === 'light' || choice === 'dark') document.documentElement.dataset.theme = choice;
}());
