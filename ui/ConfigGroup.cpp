#include "ui/ConfigGroup.h"

#include <QDoubleSpinBox>
#include <QLabel>
#include <QSpinBox>
#include <QStyle>

namespace tessera {

ConfigGroup::ConfigGroup(const QString& title, QWidget* parent) : QGroupBox(title, parent) {}

QLabel* ConfigGroup::addErrorLabel(const QString& field, QWidget* editor) {
    auto* label = new QLabel;
    label->setObjectName(field + QStringLiteral("Error"));
    label->setProperty("role", QStringLiteral("error"));
    label->setWordWrap(true);
    label->hide();
    fields_[field] = FieldView{editor, label};
    return label;
}

void ConfigGroup::markProblems(const std::map<QString, QString>& problems) {
    for (auto& [field, view] : fields_) {
        const auto it = problems.find(field);
        const QString reason = it == problems.end() ? QString() : it->second;
        view.error->setText(reason);
        view.error->setVisible(!reason.isEmpty());
        if (view.editor->property("invalid").toBool() != !reason.isEmpty()) {
            view.editor->setProperty("invalid", !reason.isEmpty());
            // Re-polish so the style sheet sees the property change.
            view.editor->style()->unpolish(view.editor);
            view.editor->style()->polish(view.editor);
        }
    }
}

QSpinBox* makeSpin(int lo, int hi, const QString& suffix) {
    auto* spin = new QSpinBox;
    spin->setRange(lo, hi);
    spin->setSuffix(suffix);
    spin->setAccelerated(true);
    return spin;
}

QDoubleSpinBox* makeRealSpin(double lo, double hi, double step, int decimals) {
    auto* spin = new QDoubleSpinBox;
    spin->setRange(lo, hi);
    spin->setSingleStep(step);
    spin->setDecimals(decimals);
    spin->setAccelerated(true);
    return spin;
}

QLabel* makeRoleLabel(const char* objectName, const char* role) {
    auto* label = new QLabel;
    label->setObjectName(QString::fromLatin1(objectName));
    label->setProperty("role", QString::fromLatin1(role));
    label->setWordWrap(true);
    return label;
}

}  // namespace tessera
